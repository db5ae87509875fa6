/*
 * A stand-in libnvidia-ml.so.1 for gpuprep's tests, compiled against NVIDIA's own nvml.h (the
 * nvidia-nvml-dev wheel) and loaded by the real nvidia-ml-py through ctypes: the real struct
 * layouts, enums and versioned symbol names, so a caller that gets the C boundary wrong fails here
 * as it would on a GPU.
 *
 * What it models and how strictly:
 *  - values come from a plain-text file named by $GPUPREP_FAKE_NVML, written by tests/nvml_stub.py
 *    from a real capture; it is read again at every nvmlInit that brings the library up from nothing, so a
 *    test can change a GPU mid-run between sessions (never under another thread's open session)
 *  - a key the file does not give is NVML_ERROR_NOT_SUPPORTED, as on a GPU that cannot report it
 *  - NULL or unwritable output pointers give NVML_ERROR_INVALID_ARGUMENT (checked by the kernel
 *    through a pipe, so a struct passed by value instead of by reference is caught, not written to)
 *  - a versioned struct whose version field is not the header's gives NVML_ERROR_ARGUMENT_VERSION_MISMATCH
 *  - functions newer than the modelled driver branch (-DNVML_BRANCH=470/525/535/550...) are not
 *    exported at all, so nvidia-ml-py raises its FunctionNotFound as it does on an older driver
 *  - "error <gpu|*> <function> <code> [<from call>]" lines inject NVML errors per GPU and per call
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "nvml.h"

#ifndef NVML_BRANCH
#define NVML_BRANCH 570
#endif

#define MAX_GPUS 64
#define MAX_KEYS 256
#define MAX_MIG 8
#define MAX_ERRORS 64
#define EXPORT __attribute__((visibility("default")))

struct kv { char key[64]; char value[1024]; };
struct nvmlDevice_st { int gpu; int mig; };           /* mig = -1: the physical GPU */
typedef struct {
    int present;
    struct kv kv[MAX_KEYS];
    int nkv;
    char mig_uuid[MAX_MIG][96];
    struct nvmlDevice_st handle;
    struct nvmlDevice_st mig_handle[MAX_MIG];
} gpu_t;
struct injected { int gpu; char fn[96]; nvmlReturn_t code; long from_call; long calls; };

static gpu_t gpus[MAX_GPUS];
static int gpu_count;
static struct kv sys_kv[32];
static int sys_nkv;
static struct injected errors[MAX_ERRORS];
static int nerrors;
static int initialised;
static int probe_pipe[2] = {-1, -1};

/* ------------------------------------------------------------------ the configuration file */
static void put(struct kv *kv, int *n, int cap, const char *key, const char *value) {
    if (*n >= cap) return;
    snprintf(kv[*n].key, sizeof kv[*n].key, "%s", key);
    snprintf(kv[*n].value, sizeof kv[*n].value, "%s", value);
    (*n)++;
}

static const char *get(const struct kv *kv, int n, const char *key) {
    for (int i = 0; i < n; i++)
        if (strcmp(kv[i].key, key) == 0) return kv[i].value;
    return NULL;
}

static nvmlReturn_t load_config(void) {
    /* call counts of injected errors carry over re-initialisation (a sampler inits NVML for every reading) */
    static struct injected prev[MAX_ERRORS];
    int nprev = nerrors;
    memcpy(prev, errors, sizeof errors);
    const char *path = getenv("GPUPREP_FAKE_NVML");
    memset(gpus, 0, sizeof gpus);
    gpu_count = sys_nkv = nerrors = 0;
    if (!path) return NVML_ERROR_DRIVER_NOT_LOADED;
    FILE *f = fopen(path, "r");
    if (!f) return NVML_ERROR_DRIVER_NOT_LOADED;
    char line[2048];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char word[64], key[64];
        int index, used = 0;
        if (sscanf(line, "%63s %n", word, &used) != 1) continue;
        char *rest = line + used;
        if (strcmp(word, "gpu") == 0 && sscanf(rest, "%d %63s %n", &index, key, &used) == 2
            && index >= 0 && index < MAX_GPUS) {
            gpu_t *g = &gpus[index];
            if (!g->present) { g->present = 1; if (index + 1 > gpu_count) gpu_count = index + 1; }
            put(g->kv, &g->nkv, MAX_KEYS, key, rest + used);
        } else if (strcmp(word, "mig") == 0) {
            int slot; char uuid[96];
            if (sscanf(rest, "%d %d %95s", &index, &slot, uuid) == 3 && index >= 0 && index < MAX_GPUS
                && slot >= 0 && slot < MAX_MIG)
                snprintf(gpus[index].mig_uuid[slot], sizeof gpus[index].mig_uuid[slot], "%s", uuid);
        } else if (strcmp(word, "error") == 0 && nerrors < MAX_ERRORS) {
            char who[16]; struct injected *e = &errors[nerrors];
            int code; long from = 1;
            if (sscanf(rest, "%15s %95s %d %ld", who, e->fn, &code, &from) >= 3) {
                e->gpu = strcmp(who, "*") == 0 ? -1 : atoi(who);
                e->code = (nvmlReturn_t)code; e->from_call = from; e->calls = 0;
                nerrors++;
            }
        } else {
            put(sys_kv, &sys_nkv, 32, word, rest);
        }
    }
    fclose(f);
    for (int i = 0; i < nerrors; i++)
        for (int j = 0; j < nprev; j++)
            if (prev[j].gpu == errors[i].gpu && prev[j].code == errors[i].code && prev[j].from_call == errors[i].from_call
                && strcmp(prev[j].fn, errors[i].fn) == 0)
                errors[i].calls = prev[j].calls;
    for (int i = 0; i < MAX_GPUS; i++) {
        gpus[i].handle.gpu = i; gpus[i].handle.mig = -1;
        for (int m = 0; m < MAX_MIG; m++) { gpus[i].mig_handle[m].gpu = i; gpus[i].mig_handle[m].mig = m; }
    }
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------ the boundary checks */
/* Is [p, p+n) memory this process may write? The kernel answers through a pipe (EFAULT), so a
 * garbage pointer (a struct passed by value leaves one in the argument register) is refused
 * instead of written to. The bytes read back are the bytes that were there. */
static int writable(void *p, size_t n) {
    if (p == NULL) return 0;
    if (probe_pipe[0] < 0 && pipe(probe_pipe) != 0) return 1;
    char buf[4096];
    if (n > sizeof buf) n = sizeof buf;
    if (write(probe_pipe[1], p, n) != (ssize_t)n) {
        if (errno == EFAULT) return 0;
        return 1;
    }
    ssize_t got = read(probe_pipe[0], p, n);
    if (got != (ssize_t)n) {
        /* not writable: drain what is left in the pipe */
        ssize_t left = got < 0 ? (ssize_t)n : (ssize_t)n - got;
        while (left > 0) { ssize_t r = read(probe_pipe[0], buf, (size_t)left); if (r <= 0) break; left -= r; }
        return 0;
    }
    return 1;
}

static nvmlReturn_t injected_error(int gpu, const char *fn) {
    for (int i = 0; i < nerrors; i++) {
        struct injected *e = &errors[i];
        if ((e->gpu == -1 || e->gpu == gpu) && strcmp(e->fn, fn) == 0) {
            e->calls++;
            if (e->calls >= e->from_call) return e->code;
        }
    }
    return NVML_SUCCESS;
}

static nvmlReturn_t enter(nvmlDevice_t device, const char *fn, gpu_t **out, int mig_ok) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    int found = 0;
    for (int i = 0; i < gpu_count && !found; i++) {
        if (device == &gpus[i].handle) found = 1;
        for (int m = 0; m < MAX_MIG && !found; m++)
            if (device == &gpus[i].mig_handle[m] && gpus[i].mig_uuid[m][0]) found = 1;
    }
    if (!found || !gpus[device->gpu].present) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t r = injected_error(device->gpu, fn);
    if (r != NVML_SUCCESS) return r;
    if (device->mig >= 0 && !mig_ok) return NVML_ERROR_NOT_SUPPORTED;
    *out = &gpus[device->gpu];
    return NVML_SUCCESS;
}

#define DEVICE(mig_ok) gpu_t *g; { nvmlReturn_t r_ = enter(device, __func__, &g, mig_ok); if (r_) return r_; }
#define OUT(p) if (!writable((void *)(p), sizeof *(p))) return NVML_ERROR_INVALID_ARGUMENT

static const char *gkey(gpu_t *g, const char *key) { return get(g->kv, g->nkv, key); }

static nvmlReturn_t get_uint(gpu_t *g, const char *key, unsigned int *out) {
    OUT(out);
    const char *v = gkey(g, key);
    if (!v) return NVML_ERROR_NOT_SUPPORTED;
    *out = (unsigned int)strtoul(v, NULL, 0);
    return NVML_SUCCESS;
}

static nvmlReturn_t get_text(const char *v, char *out, unsigned int length) {
    if (out == NULL || length == 0) return NVML_ERROR_INVALID_ARGUMENT;
    if (!v) return NVML_ERROR_NOT_SUPPORTED;
    if (strlen(v) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    if (!writable(out, strlen(v) + 1)) return NVML_ERROR_INVALID_ARGUMENT;
    strcpy(out, v);
    return NVML_SUCCESS;
}

static nvmlReturn_t keyed_uint(gpu_t *g, const char *prefix, long which, unsigned int *out) {
    char key[64];
    snprintf(key, sizeof key, "%s.%ld", prefix, which);
    return get_uint(g, key, out);
}

/* ------------------------------------------------------------------ library */
/* NVML is thread-safe and counts its initialisations: a second thread's nvmlInit while another thread's session is
 * open neither re-reads the configuration under it nor ends it (nvml.h, nvmlInit_v2 and nvmlShutdown) */
static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
static nvmlReturn_t init_locked(void) {
    if (initialised) { initialised++; return NVML_SUCCESS; }
    nvmlReturn_t r = load_config();
    if (r != NVML_SUCCESS) return r;
    const char *fail = get(sys_kv, sys_nkv, "init");
    if (fail) return (nvmlReturn_t)atoi(fail);
    /* a session starts when the library comes up from nothing: what, without persistence mode, initialises every
     * GPU (1-3 s each on a real node); GPUPREP_FAKE_NVML_SESSIONS names a file that gets a line per session */
    const char *sessions = getenv("GPUPREP_FAKE_NVML_SESSIONS");
    if (sessions) {
        FILE *log = fopen(sessions, "a");
        if (log) { fprintf(log, "%d\n", (int)getpid()); fclose(log); }
    }
    initialised++;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    pthread_mutex_lock(&init_lock);
    nvmlReturn_t r = init_locked();
    pthread_mutex_unlock(&init_lock);
    return r;
}
EXPORT nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
EXPORT nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }

EXPORT nvmlReturn_t nvmlShutdown(void) {
    pthread_mutex_lock(&init_lock);
    nvmlReturn_t r = initialised ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
    if (initialised) initialised--;
    pthread_mutex_unlock(&init_lock);
    return r;
}

static const struct { nvmlReturn_t code; const char *text; } ERROR_TEXT[] = {
    {NVML_SUCCESS, "Success"}, {NVML_ERROR_UNINITIALIZED, "Uninitialized"},
    {NVML_ERROR_INVALID_ARGUMENT, "Invalid Argument"}, {NVML_ERROR_NOT_SUPPORTED, "Not Supported"},
    {NVML_ERROR_NO_PERMISSION, "Insufficient Permissions"}, {NVML_ERROR_NOT_FOUND, "Not Found"},
    {NVML_ERROR_INSUFFICIENT_SIZE, "Insufficient Size"}, {NVML_ERROR_DRIVER_NOT_LOADED, "Driver Not Loaded"},
    {NVML_ERROR_FUNCTION_NOT_FOUND, "Function Not Found"}, {NVML_ERROR_GPU_IS_LOST, "GPU is lost"},
    {NVML_ERROR_RESET_REQUIRED, "GPU requires restart"}, {NVML_ERROR_LIB_RM_VERSION_MISMATCH, "RM has detected an NVML/RM version mismatch."},
    {NVML_ERROR_INSUFFICIENT_RESOURCES, "Insufficient Resources"}, {NVML_ERROR_ARGUMENT_VERSION_MISMATCH, "Version mismatch"},
    {NVML_ERROR_UNKNOWN, "Unknown Error"},
};
EXPORT const char *nvmlErrorString(nvmlReturn_t result) {
    for (size_t i = 0; i < sizeof ERROR_TEXT / sizeof ERROR_TEXT[0]; i++)
        if (ERROR_TEXT[i].code == result) return ERROR_TEXT[i].text;
    return "Unknown Error";
}

EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    return get_text(get(sys_kv, sys_nkv, "driver"), version, length);
}
EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    return get_text(get(sys_kv, sys_nkv, "nvml"), version, length);
}
EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    OUT(cudaDriverVersion);
    const char *v = get(sys_kv, sys_nkv, "cuda");
    if (!v) return NVML_ERROR_NOT_SUPPORTED;
    *cudaDriverVersion = atoi(v);
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v) { return nvmlSystemGetCudaDriverVersion(v); }

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    OUT(deviceCount);
    nvmlReturn_t r = injected_error(-1, "nvmlDeviceGetCount_v2");
    if (r != NVML_SUCCESS) return r;
    *deviceCount = (unsigned int)gpu_count;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    OUT(device);
    if (index >= (unsigned int)gpu_count || !gpus[index].present) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t r = injected_error((int)index, "nvmlDeviceGetHandleByIndex_v2");
    if (r != NVML_SUCCESS) return r;
    *device = &gpus[index].handle;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (uuid == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    OUT(device);
    for (int i = 0; i < gpu_count; i++) {
        const char *mine = gkey(&gpus[i], "uuid");
        if (mine && strcmp(mine, uuid) == 0) {
            nvmlReturn_t r = injected_error(i, "nvmlDeviceGetHandleByUUID");
            if (r != NVML_SUCCESS) return r;
            *device = &gpus[i].handle;
            return NVML_SUCCESS;
        }
        for (int m = 0; m < MAX_MIG; m++)
            if (gpus[i].mig_uuid[m][0] && strcmp(gpus[i].mig_uuid[m], uuid) == 0) {
                *device = &gpus[i].mig_handle[m];
                return NVML_SUCCESS;
            }
    }
    return NVML_ERROR_NOT_FOUND;
}

/* ------------------------------------------------------------------ identity */
EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    DEVICE(1) return get_text(gkey(g, "name"), name, length);
}
EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    DEVICE(1)
    if (device->mig >= 0) return get_text(g->mig_uuid[device->mig], uuid, length);
    return get_text(gkey(g, "uuid"), uuid, length);
}
EXPORT nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char *serial, unsigned int length) {
    DEVICE(0) return get_text(gkey(g, "serial"), serial, length);
}
EXPORT nvmlReturn_t nvmlDeviceGetVbiosVersion(nvmlDevice_t device, char *version, unsigned int length) {
    DEVICE(0) return get_text(gkey(g, "vbios"), version, length);
}
EXPORT nvmlReturn_t nvmlDeviceGetInforomImageVersion(nvmlDevice_t device, char *version, unsigned int length) {
    DEVICE(0) return get_text(gkey(g, "inforom"), version, length);
}
#if NVML_BRANCH >= 510
EXPORT nvmlReturn_t nvmlDeviceGetGspFirmwareVersion(nvmlDevice_t device, char *version) {
    DEVICE(0) return get_text(gkey(g, "gsp"), version, NVML_GSP_FIRMWARE_VERSION_BUF_SIZE);
}
#endif

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    DEVICE(0)
    OUT(pci);
    const char *bus = gkey(g, "busid");
    if (!bus) return NVML_ERROR_NOT_SUPPORTED;
    memset(pci, 0, sizeof *pci);
    snprintf(pci->busId, sizeof pci->busId, "%s", bus);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%s", bus + (strlen(bus) > 12 ? 4 : 0));
    unsigned int domain = 0, b = 0, dev = 0;
    sscanf(bus, "%x:%x:%x", &domain, &b, &dev);
    pci->domain = domain; pci->bus = b; pci->device = dev;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, nvmlDeviceArchitecture_t *arch) {
    DEVICE(0) return get_uint(g, "arch", arch);
}
EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor) {
    DEVICE(0)
    OUT(major); OUT(minor);
    const char *cc = gkey(g, "cc");
    if (!cc || sscanf(cc, "%d.%d", major, minor) != 2) return NVML_ERROR_NOT_SUPPORTED;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    DEVICE(1)
    OUT(memory);
    const char *total = gkey(g, device->mig >= 0 ? "mig_mem_total" : "mem_total");
    if (!total) return NVML_ERROR_NOT_SUPPORTED;
    const char *used = gkey(g, "mem_used");
    memory->total = strtoull(total, NULL, 0);
    memory->used = used ? strtoull(used, NULL, 0) : 0;
    memory->free = memory->total - memory->used;
    return NVML_SUCCESS;
}
#if NVML_BRANCH >= 510
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    DEVICE(1)
    OUT(memory);
    if (memory->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    nvmlMemory_t v1;
    nvmlReturn_t r = nvmlDeviceGetMemoryInfo(device, &v1);
    if (r) return r;
    memory->total = v1.total; memory->used = v1.used; memory->free = v1.free; memory->reserved = 0;
    return NVML_SUCCESS;
}
#endif

EXPORT nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, nvmlEnableState_t *mode) {
    DEVICE(0) return get_uint(g, "persistence", mode);
}
EXPORT nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device, nvmlComputeMode_t *mode) {
    DEVICE(0) return get_uint(g, "compute_mode", mode);
}

/* ------------------------------------------------------------------ MIG */
EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode, unsigned int *pendingMode) {
    DEVICE(0)
    OUT(currentMode); OUT(pendingMode);
    const char *v = gkey(g, "mig_mode");
    if (!v || sscanf(v, "%u %u", currentMode, pendingMode) != 2) return NVML_ERROR_NOT_SUPPORTED;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count) {
    DEVICE(0)
    OUT(count);
    const char *v = gkey(g, "mig_mode");
    if (!v || v[0] != '1') return NVML_ERROR_NOT_SUPPORTED;
    *count = MAX_MIG - 1;      /* seven slots on an A100/H100 */
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index, nvmlDevice_t *migDevice) {
    DEVICE(0)
    OUT(migDevice);
    if (index >= MAX_MIG - 1) return NVML_ERROR_INVALID_ARGUMENT;
    if (!g->mig_uuid[index][0]) return NVML_ERROR_NOT_FOUND;
    *migDevice = &g->mig_handle[index];
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice) {
    DEVICE(1)
    OUT(isMigDevice);
    *isMigDevice = device->mig >= 0;
    (void)g;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice, nvmlDevice_t *device) {
    nvmlDevice_t self = migDevice;
    gpu_t *g;
    nvmlReturn_t r = enter(self, __func__, &g, 1);
    if (r) return r;
    OUT(device);
    if (migDevice->mig < 0) return NVML_ERROR_INVALID_ARGUMENT;
    *device = &g->handle;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------ clocks */
EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock) {
    DEVICE(0) return keyed_uint(g, "clock", type, clock);
}
EXPORT nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock) {
    DEVICE(0) return keyed_uint(g, "max_clock", type, clock);
}
EXPORT nvmlReturn_t nvmlDeviceGetApplicationsClock(nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock) {
    DEVICE(0) return keyed_uint(g, "app_clock", type, clock);
}
EXPORT nvmlReturn_t nvmlDeviceGetDefaultApplicationsClock(nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock) {
    DEVICE(0) return keyed_uint(g, "default_app_clock", type, clock);
}

/* a list "a,b,c" answered with NVML's two-call convention (count first, then INSUFFICIENT_SIZE) */
static nvmlReturn_t get_list(const char *v, unsigned int *count, unsigned int *out) {
    if (!v) return NVML_ERROR_NOT_SUPPORTED;
    OUT(count);
    unsigned int n = 0, items[512];
    for (const char *p = v; *p && n < 512;) {
        char *end;
        items[n++] = (unsigned int)strtoul(p, &end, 10);
        p = *end == ',' ? end + 1 : end;
        if (end == p && *p) break;
    }
    if (out == NULL || *count < n) { *count = n; return NVML_ERROR_INSUFFICIENT_SIZE; }
    if (!writable(out, n * sizeof *out)) return NVML_ERROR_INVALID_ARGUMENT;
    memcpy(out, items, n * sizeof *out);
    *count = n;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetSupportedMemoryClocks(nvmlDevice_t device, unsigned int *count, unsigned int *clocksMHz) {
    DEVICE(0) return get_list(gkey(g, "supported_mem"), count, clocksMHz);
}
EXPORT nvmlReturn_t nvmlDeviceGetSupportedGraphicsClocks(nvmlDevice_t device, unsigned int memoryClockMHz,
                                                       unsigned int *count, unsigned int *clocksMHz) {
    DEVICE(0)
    char key[64];
    snprintf(key, sizeof key, "supported_gr.%u", memoryClockMHz);
    if (!gkey(g, "supported_mem")) return NVML_ERROR_NOT_SUPPORTED;
    if (!gkey(g, key)) return NVML_ERROR_NOT_FOUND;
    return get_list(gkey(g, key), count, clocksMHz);
}

/* "reasons A;B;C": a timeline, the GPU's Nth reading (counted over the process's life, across nvmlInit as the
 * burn-in's sampler re-initialises for each) answers the Nth value, the last one from then on. nvml.h: HW Slowdown
 * "may be reported during PState or clock change", so a timeline can hold it for one reading only. */
static long reasons_read[MAX_GPUS];
static nvmlReturn_t reasons(gpu_t *g, unsigned long long *out) {
    OUT(out);
    const char *v = gkey(g, "reasons");
    if (!v) return NVML_ERROR_NOT_SUPPORTED;
    long n = reasons_read[g - gpus]++;
    for (const char *next; n > 0 && (next = strchr(v, ';')) != NULL; n--) v = next + 1;
    *out = strtoull(v, NULL, 0);
    return NVML_SUCCESS;
}
#if NVML_BRANCH >= 535
EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device, unsigned long long *r) {
    DEVICE(0) return reasons(g, r);
}
#endif
EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device, unsigned long long *r) {
    DEVICE(0) return reasons(g, r);
}

/* ------------------------------------------------------------------ power and temperature */
EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power) {
    DEVICE(0) return get_uint(g, "power_usage", power);
}
EXPORT nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t device, unsigned int *limit) {
    DEVICE(0) return get_uint(g, "power_limit", limit);
}
EXPORT nvmlReturn_t nvmlDeviceGetPowerManagementDefaultLimit(nvmlDevice_t device, unsigned int *limit) {
    DEVICE(0) return get_uint(g, "power_default_limit", limit);
}
EXPORT nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int *limit) {
    DEVICE(0) return get_uint(g, "power_enforced_limit", limit);
}
EXPORT nvmlReturn_t nvmlDeviceGetPowerManagementLimitConstraints(nvmlDevice_t device, unsigned int *minLimit,
                                                               unsigned int *maxLimit) {
    DEVICE(0)
    OUT(minLimit); OUT(maxLimit);
    const char *v = gkey(g, "power_constraints");
    if (!v || sscanf(v, "%u %u", minLimit, maxLimit) != 2) return NVML_ERROR_NOT_SUPPORTED;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensor, unsigned int *temp) {
    DEVICE(0)
    if (sensor != NVML_TEMPERATURE_GPU) return NVML_ERROR_INVALID_ARGUMENT;
    return get_uint(g, "temp", temp);
}
EXPORT nvmlReturn_t nvmlDeviceGetTemperatureThreshold(nvmlDevice_t device, nvmlTemperatureThresholds_t type, unsigned int *temp) {
    DEVICE(0) return keyed_uint(g, "temp_threshold", type, temp);
}
#if NVML_BRANCH >= 570
EXPORT nvmlReturn_t nvmlDeviceGetMarginTemperature(nvmlDevice_t device, nvmlMarginTemperature_t *margin) {
    DEVICE(0)
    OUT(margin);
    if (margin->version != nvmlMarginTemperature_v1) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    const char *v = gkey(g, "tlimit");
    if (!v) return NVML_ERROR_NOT_SUPPORTED;
    margin->marginTemperature = (int)strtol(v, NULL, 0);
    return NVML_SUCCESS;
}
#endif
EXPORT nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount, nvmlFieldValue_t *values) {
    DEVICE(0)
    if (valuesCount < 0 || !writable(values, (size_t)valuesCount * sizeof *values)) return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < valuesCount; i++) {
        char key[64];
        snprintf(key, sizeof key, "field.%u", values[i].fieldId);
        const char *v = gkey(g, key);
        if (!v) { values[i].nvmlReturn = NVML_ERROR_NOT_SUPPORTED; continue; }
        values[i].nvmlReturn = NVML_SUCCESS;
        if (values[i].fieldId >= NVML_FI_DEV_TEMPERATURE_SHUTDOWN_TLIMIT &&
            values[i].fieldId <= NVML_FI_DEV_TEMPERATURE_GPU_MAX_TLIMIT) {   /* margins, below zero past T.Limit */
            values[i].valueType = NVML_VALUE_TYPE_SIGNED_INT;
            values[i].value.siVal = (int)strtol(v, NULL, 0);
            continue;
        }
        values[i].valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
        values[i].value.uiVal = (unsigned int)strtoul(v, NULL, 0);
    }
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------ memory health */
EXPORT nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t device, nvmlEnableState_t *current, nvmlEnableState_t *pending) {
    DEVICE(0)
    OUT(current); OUT(pending);
    const char *v = gkey(g, "ecc_mode");
    unsigned int c, p;
    if (!v || sscanf(v, "%u %u", &c, &p) != 2) return NVML_ERROR_NOT_SUPPORTED;
    *current = c; *pending = p;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, nvmlMemoryErrorType_t errorType,
                                               nvmlEccCounterType_t counterType, unsigned long long *eccCounts) {
    DEVICE(0)
    OUT(eccCounts);
    char key[64];
    snprintf(key, sizeof key, "ecc.%d.%d", (int)errorType, (int)counterType);
    const char *v = gkey(g, key);
    if (!v) return NVML_ERROR_NOT_SUPPORTED;
    *eccCounts = strtoull(v, NULL, 0);
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t device, nvmlPageRetirementCause_t cause,
                                             unsigned int *pageCount, unsigned long long *addresses) {
    DEVICE(0)
    OUT(pageCount);
    char key[64];
    snprintf(key, sizeof key, "retired.%d", (int)cause);
    const char *v = gkey(g, key);
    if (!v) return NVML_ERROR_NOT_SUPPORTED;
    unsigned int n = (unsigned int)strtoul(v, NULL, 0);
    if (addresses == NULL || *pageCount < n) { *pageCount = n; return n ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS; }
    if (!writable(addresses, n * sizeof *addresses)) return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int i = 0; i < n; i++) addresses[i] = 0x1000ull * (i + 1);
    *pageCount = n;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device, nvmlEnableState_t *isPending) {
    DEVICE(0) return get_uint(g, "retired_pending", isPending);
}
EXPORT nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *corrRows, unsigned int *uncRows,
                                             unsigned int *isPending, unsigned int *failureOccurred) {
    DEVICE(0)
    OUT(corrRows); OUT(uncRows); OUT(isPending); OUT(failureOccurred);
    const char *v = gkey(g, "remapped");
    if (!v || sscanf(v, "%u %u %u %u", corrRows, uncRows, isPending, failureOccurred) != 4) return NVML_ERROR_NOT_SUPPORTED;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------ links */
EXPORT nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t device, unsigned int *v) { DEVICE(0) return get_uint(g, "pcie_gen_current", v); }
EXPORT nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t device, unsigned int *v) { DEVICE(0) return get_uint(g, "pcie_gen_max", v); }
EXPORT nvmlReturn_t nvmlDeviceGetGpuMaxPcieLinkGeneration(nvmlDevice_t device, unsigned int *v) { DEVICE(0) return get_uint(g, "pcie_gen_device_max", v); }
EXPORT nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t device, unsigned int *v) { DEVICE(0) return get_uint(g, "pcie_width_current", v); }
EXPORT nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t device, unsigned int *v) { DEVICE(0) return get_uint(g, "pcie_width_max", v); }

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link, nvmlEnableState_t *isActive) {
    DEVICE(0)
    if (!gkey(g, "nvlinks")) return NVML_ERROR_NOT_SUPPORTED;
    if (link >= NVML_NVLINK_MAX_LINKS) return NVML_ERROR_INVALID_ARGUMENT;
    char key[64];
    snprintf(key, sizeof key, "nvlink_state.%u", link);
    if (!gkey(g, key)) { OUT(isActive); return NVML_ERROR_INVALID_ARGUMENT; }
    return get_uint(g, key, isActive);
}
EXPORT nvmlReturn_t nvmlDeviceGetNvLinkVersion(nvmlDevice_t device, unsigned int link, unsigned int *version) {
    DEVICE(0)
    if (!gkey(g, "nvlinks")) return NVML_ERROR_NOT_SUPPORTED;
    return keyed_uint(g, "nvlink_version", link, version);
}

#if NVML_BRANCH >= 525
/* nvmlGpuFabricInfo_t: a pointer is required (nvidia-ml-py passes the argument straight through) */
EXPORT nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t device, nvmlGpuFabricInfo_t *info) {
    DEVICE(0)
    OUT(info);
    const char *v = gkey(g, "fabric");
    unsigned int state, status, clique, health;
    if (!v || sscanf(v, "%u %u %u %u", &state, &status, &clique, &health) != 4) return NVML_ERROR_NOT_SUPPORTED;
    memset(info, 0, sizeof *info);
    info->state = (nvmlGpuFabricState_t)state; info->status = (nvmlReturn_t)status; info->cliqueId = clique;
    return NVML_SUCCESS;
}
#endif
#if NVML_BRANCH >= 550
/* "fabric STATE STATUS CLIQUE MASK [SUMMARY]". The caller's struct version says how much of it may be written: v2
 * ends at healthMask, v3 adds healthSummary (R570 in this model); a version the branch does not know is refused, as
 * the real library refuses it, and nothing past the caller's struct is touched. */
EXPORT nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t device, nvmlGpuFabricInfoV_t *info) {
    DEVICE(0)
    OUT(info);
    int v3 = info->version == nvmlGpuFabricInfo_v3;
    if (info->version != nvmlGpuFabricInfo_v2 && !(v3 && NVML_BRANCH >= 570)) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    const char *v = gkey(g, "fabric");
    unsigned int state, status, clique, health, summary = 0;
    int n = v ? sscanf(v, "%u %u %u %u %u", &state, &status, &clique, &health, &summary) : 0;
    if (n < 4) return NVML_ERROR_NOT_SUPPORTED;
    nvmlGpuFabricInfo_v2_t *out = (nvmlGpuFabricInfo_v2_t *)info;
    out->state = (nvmlGpuFabricState_t)state; out->status = (nvmlReturn_t)status; out->cliqueId = clique;
    out->healthMask = health;
    if (v3) info->healthSummary = (unsigned char)summary;
    return NVML_SUCCESS;
}
#endif

#if NVML_BRANCH >= 535
EXPORT nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t device, unsigned int *node) {
    DEVICE(0) return get_uint(g, "numa", node);
}
#endif
EXPORT nvmlReturn_t nvmlDeviceGetCpuAffinity(nvmlDevice_t device, unsigned int cpuSetSize, unsigned long *cpuSet) {
    DEVICE(0)
    if (cpuSetSize == 0 || !writable(cpuSet, cpuSetSize * sizeof *cpuSet)) return NVML_ERROR_INVALID_ARGUMENT;
    const char *v = gkey(g, "affinity");
    if (!v) return NVML_ERROR_NOT_SUPPORTED;
    memset(cpuSet, 0, cpuSetSize * sizeof *cpuSet);
    unsigned int word = 0;
    for (const char *p = v; *p && word < cpuSetSize; word++) {
        char *end;
        cpuSet[word] = strtoul(p, &end, 16);
        p = *end == ',' ? end + 1 : end;
        if (end == p && *p) break;
    }
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------ per-process accounting (the Slurm job report)
 * "gpu N accounting_mode 0|1" and "gpu N accounted PID:GPU%:MEM%:MAXBYTES:START_US:TIME_MS:RUNNING,...": what
 * nvmlDeviceGetAccountingStats keeps for each process, running or ended, while accounting mode is on. */
#define MAX_ACCOUNTED 64
struct accounted { unsigned int pid; nvmlAccountingStats_t stats; };
static int accounted_of(gpu_t *g, struct accounted *out) {
    const char *v = gkey(g, "accounted");
    int n = 0;
    while (v && *v && n < MAX_ACCOUNTED) {
        struct accounted *a = &out[n];
        memset(a, 0, sizeof *a);
        if (sscanf(v, "%u:%u:%u:%llu:%llu:%llu:%u", &a->pid, &a->stats.gpuUtilization, &a->stats.memoryUtilization,
                   &a->stats.maxMemoryUsage, &a->stats.startTime, &a->stats.time, &a->stats.isRunning) != 7) return -1;
        n++;
        v = strchr(v, ',');
        if (v) v++;
    }
    return n;
}
/* the processes kept, while accounting mode is on (nvml.h: NOT_SUPPORTED when it is disabled) */
static nvmlReturn_t accounted_list(gpu_t *g, struct accounted *all, int *n) {
    const char *v = gkey(g, "accounting_mode");
    if (!v || strtoul(v, NULL, 0) != 1) return NVML_ERROR_NOT_SUPPORTED;
    *n = accounted_of(g, all);
    return *n < 0 ? NVML_ERROR_UNKNOWN : NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetAccountingMode(nvmlDevice_t device, nvmlEnableState_t *mode) {
    DEVICE(0)
    OUT(mode);
    const char *v = gkey(g, "accounting_mode");
    if (!v) return NVML_ERROR_NOT_SUPPORTED;
    *mode = strtoul(v, NULL, 0) == 1 ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetAccountingBufferSize(nvmlDevice_t device, unsigned int *bufferSize) {
    DEVICE(0)
    OUT(bufferSize);
    if (!gkey(g, "accounting_mode")) return NVML_ERROR_NOT_SUPPORTED;
    *bufferSize = 4000;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetAccountingPids(nvmlDevice_t device, unsigned int *count, unsigned int *pids) {
    DEVICE(0)
    OUT(count);
    struct accounted all[MAX_ACCOUNTED];
    int n;
    nvmlReturn_t r = accounted_list(g, all, &n);
    if (r) return r;
    if (*count < (unsigned int)n || (pids == NULL && n > 0)) { *count = (unsigned int)n; return NVML_ERROR_INSUFFICIENT_SIZE; }
    if (n && !writable(pids, (size_t)n * sizeof *pids)) return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < n; i++) pids[i] = all[i].pid;
    *count = (unsigned int)n;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetAccountingStats(nvmlDevice_t device, unsigned int pid, nvmlAccountingStats_t *stats) {
    DEVICE(0)
    OUT(stats);
    struct accounted all[MAX_ACCOUNTED];
    int n;
    nvmlReturn_t r = accounted_list(g, all, &n);
    if (r) return r;
    for (int i = 0; i < n; i++) {
        if (all[i].pid == pid) { *stats = all[i].stats; return NVML_SUCCESS; }
    }
    return NVML_ERROR_NOT_FOUND;
}

/* ------------------------------------------------------------------ GPU performance monitoring (Hopper+)
 * "gpu N gpm_tensor V;V2;..." makes GPU N support GPM; the Nth nvmlGpmMetricsGet over two of its samples answers
 * NVML_GPM_METRIC_ANY_TENSOR_UTIL = the Nth value (the last from then on); every other metric NOT_SUPPORTED. */
#if NVML_BRANCH >= 525
struct nvmlGpmSample_st { int gpu; int filled; };
static long gpm_metrics_read[MAX_GPUS];
EXPORT nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t device, nvmlGpmSupport_t *support) {
    DEVICE(0)
    OUT(support);
    if (support->version != NVML_GPM_SUPPORT_VERSION) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    support->isSupportedDevice = gkey(g, "gpm_tensor") != NULL;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t *sample) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    OUT(sample);
    *sample = calloc(1, sizeof **sample);
    return *sample ? NVML_SUCCESS : NVML_ERROR_MEMORY;
}
EXPORT nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t sample) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (sample == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    free(sample);
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t device, nvmlGpmSample_t sample) {
    DEVICE(0)
    if (sample == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (!gkey(g, "gpm_tensor")) return NVML_ERROR_NOT_SUPPORTED;
    sample->gpu = (int)(g - gpus);
    sample->filled = 1;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *get) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    OUT(get);
    if (get->version != NVML_GPM_METRICS_GET_VERSION) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    nvmlGpmSample_t a = get->sample1, b = get->sample2;
    if (!a || !b || !a->filled || !b->filled || a->gpu != b->gpu || a == b || get->numMetrics > NVML_GPM_METRIC_MAX)
        return NVML_ERROR_INVALID_ARGUMENT;
    const char *v = gkey(&gpus[b->gpu], "gpm_tensor");
    for (long n = gpm_metrics_read[b->gpu]++; n > 0 && v && strchr(v, ';'); n--) v = strchr(v, ';') + 1;
    for (unsigned int i = 0; i < get->numMetrics; i++) {
        nvmlGpmMetric_t *m = &get->metrics[i];
        m->nvmlReturn = m->metricId == NVML_GPM_METRIC_ANY_TENSOR_UTIL ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
        m->value = m->nvmlReturn == NVML_SUCCESS ? strtod(v, NULL) : 0.0;
    }
    return NVML_SUCCESS;
}
#endif

/* ------------------------------------------------------------------ a running job (gpuprep watch)
 * "gpu N util G,M" (percent of time a kernel ran / memory was read or written), "gpu N pcie_rx KB/s",
 * "gpu N pcie_tx KB/s", "gpu N procs PID:BYTES,PID:BYTES" (the compute processes). The configuration is read
 * again at every nvmlInit, so a test rewrites it between samples to give a GPU a timeline. */
EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization) {
    DEVICE(0)
    OUT(utilization);
    const char *v = gkey(g, "util");
    if (!v) return NVML_ERROR_NOT_SUPPORTED;
    unsigned int gpu = 0, memory = 0;
    if (sscanf(v, "%u,%u", &gpu, &memory) < 1 || gpu > 100 || memory > 100) return NVML_ERROR_UNKNOWN;
    utilization->gpu = gpu;
    utilization->memory = memory;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t device, nvmlPcieUtilCounter_t counter, unsigned int *value) {
    DEVICE(0)
    if (counter == NVML_PCIE_UTIL_TX_BYTES) return get_uint(g, "pcie_tx", value);
    if (counter == NVML_PCIE_UTIL_RX_BYTES) return get_uint(g, "pcie_rx", value);
    return NVML_ERROR_INVALID_ARGUMENT;
}
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                          nvmlProcessInfo_t *infos) {
    DEVICE(0)
    OUT(infoCount);
    const char *v = gkey(g, "procs");
    unsigned int pids[64]; unsigned long long used[64]; unsigned int n = 0;
    while (v && *v && n < 64) {
        if (sscanf(v, "%u:%llu", &pids[n], &used[n]) != 2) return NVML_ERROR_UNKNOWN;
        n++;
        v = strchr(v, ',');
        if (v) v++;
    }
    /* nvml.h: with *infoCount too small (or infos NULL), the count needed and INSUFFICIENT_SIZE */
    if (*infoCount < n || (infos == NULL && n > 0)) { *infoCount = n; return NVML_ERROR_INSUFFICIENT_SIZE; }
    if (n && !writable(infos, n * sizeof *infos)) return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int i = 0; i < n; i++) {
        infos[i].pid = pids[i];
        infos[i].usedGpuMemory = used[i];
        infos[i].gpuInstanceId = 0xFFFFFFFF;
        infos[i].computeInstanceId = 0xFFFFFFFF;
    }
    *infoCount = n;
    return NVML_SUCCESS;
}
