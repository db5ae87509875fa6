"""Issue 46: the results store in PostgreSQL, against a real server (Debian's PostgreSQL, a throwaway cluster of
this test's own on 127.0.0.1 with password authentication). The same reports give the same history as in SQLite;
the password reaches no output; an unreachable or malformed store is one line, before a burn-in starts."""
import glob
import json
import os
import shutil
import socket
import subprocess
import tempfile

import pytest

from conftest import run_cli
from gpuprep.burnin.peers import fleet_report
from gpuprep.store import history
from test_fleet_history import _fleet

PASSWORD = 'Pa"ss w0rd:@/'          # characters a URL must escape and a log must never show
SERVERS = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _as_owner(argv, owner):
    """initdb and the server refuse to run as root: as the postgres user when we are root."""
    return ["runuser", "-u", owner, "--", *argv] if os.geteuid() == 0 else argv


@pytest.fixture(scope="module")
def server():
    if not SERVERS:
        pytest.skip("PostgreSQL's server is not installed (apt-get install postgresql): the PostgreSQL store is untested")
    bindir = os.path.dirname(SERVERS[-1])
    owner = "postgres" if os.geteuid() == 0 else None
    home = tempfile.mkdtemp(prefix="gpuprep-pg-")
    if owner:
        shutil.chown(home, owner)
    pwfile = os.path.join(home, "pw")
    with open(pwfile, "w") as fh:
        fh.write(PASSWORD + "\n")
    if owner:
        shutil.chown(pwfile, owner)
    data, port = os.path.join(home, "db"), _free_port()
    init = subprocess.run(_as_owner([f"{bindir}/initdb", "-D", data, "-U", "gpuprep", "-A", "scram-sha-256",
                                     f"--pwfile={pwfile}", "--no-sync"], owner), capture_output=True, text=True)
    assert init.returncode == 0, init.stderr
    started = subprocess.run(_as_owner([f"{bindir}/pg_ctl", "-D", data, "-l", os.path.join(home, "log"), "-w",
                                        "-t", "120", "-o", f"-p {port} -k {home} -c listen_addresses=127.0.0.1 "
                                        "-c fsync=off", "start"], owner), capture_output=True, text=True)
    assert started.returncode == 0, started.stdout + started.stderr
    try:
        yield {"port": port, "bindir": bindir, "home": home, "owner": owner}
    finally:
        subprocess.run(_as_owner([f"{bindir}/pg_ctl", "-D", data, "-m", "immediate", "stop"], owner),
                       capture_output=True)
        shutil.rmtree(home, ignore_errors=True)


def _database(server, name):
    """A fresh database of the cluster, and its URL without the password (given in PGPASSWORD)."""
    done = subprocess.run(_as_owner([f"{server['bindir']}/createdb", "-h", server["home"], "-p", str(server["port"]),
                                     "-U", "gpuprep", name], server["owner"]), capture_output=True, text=True,
                          env=dict(os.environ, PGPASSWORD=PASSWORD))
    assert done.returncode == 0, done.stderr
    return f"postgresql://gpuprep@127.0.0.1:{server['port']}/{name}"


def _quoted(url):
    from urllib.parse import quote
    return url.replace("gpuprep@", f"gpuprep:{quote(PASSWORD, safe='')}@")


def test_the_same_reports_give_the_same_history_in_postgresql_as_in_sqlite(server, tmp_path, monkeypatch):
    monkeypatch.setenv("PGPASSWORD", PASSWORD)
    url = _database(server, "same")
    _fleet(tmp_path / "results.sqlite", slow_gpu=(2, 5))
    _fleet(url, slow_gpu=(2, 5))
    lite, pg = history(str(tmp_path / "results.sqlite")), history(url)
    assert pg.keys() == lite.keys() and len(pg["NVIDIA H100 80GB HBM3"]) == 32
    for model, series in lite.items():
        assert {gpu: s.compute_ms for gpu, s in pg[model].items()} == {gpu: s.compute_ms for gpu, s in series.items()}
    found = [(f.id, f.evidence["host"], f.evidence["gpu"]) for f in fleet_report(pg) if f.severity == "warn"]
    assert found == [("fleet.slow-gpu", "gpu-node-02", "GPU-0205-aaaa")]


def test_fleet_report_reads_a_postgresql_store_and_never_prints_its_password(server, tmp_path, monkeypatch):
    monkeypatch.setenv("PGPASSWORD", PASSWORD)
    url = _database(server, "report")
    _fleet(url, dropped=(1, 3))
    monkeypatch.delenv("PGPASSWORD")
    with_password = _quoted(url)
    done = run_cli("fleet", "report", with_password, "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert ("fleet.gpu-dropped", "GPU-0103-aaaa") in {(f["id"], f["evidence"]["gpu"]) for f in doc["findings"]}
    assert doc["store"] == url.replace("gpuprep@", "gpuprep:***@")
    text = run_cli("fleet", "report", with_password)
    for out in (done.stdout, done.stderr, text.stdout, text.stderr):
        assert PASSWORD not in out and _quoted(url) not in out
    wrong = run_cli("fleet", "report", url.replace("gpuprep@", "gpuprep:nope@"))
    assert wrong.returncode == 1 and len(wrong.stderr.splitlines()) == 1 and "cannot be reached" in wrong.stderr
    assert "nope" not in wrong.stderr and "password authentication failed" in wrong.stderr


def test_a_database_that_is_not_a_store_and_a_malformed_url_are_one_line(server, monkeypatch):
    monkeypatch.setenv("PGPASSWORD", PASSWORD)
    url = _database(server, "other")
    subprocess.run(_as_owner([f"{server['bindir']}/psql", "-h", server["home"], "-p", str(server["port"]), "-U",
                              "gpuprep", "-d", "other", "-c", "CREATE TABLE meta (key int)"], server["owner"]),
                   check=True, capture_output=True, env=dict(os.environ, PGPASSWORD=PASSWORD))
    done = run_cli("fleet", "report", url)
    assert done.returncode == 2 and "not a gpuprep results store" in done.stderr, done.stderr
    assert len(done.stderr.splitlines()) == 1
    for bad in ("postgresql://127.0.0.1/db", "postgresql://u@127.0.0.1:port/db", "postgresql://u@127.0.0.1/db?x=1"):
        done = run_cli("fleet", "report", bad)
        assert done.returncode == 2 and len(done.stderr.splitlines()) == 1 and "Traceback" not in done.stderr, bad


def test_a_burnin_with_an_unreachable_store_stops_before_it_starts():
    port = _free_port()          # nothing listens there
    done = run_cli("burnin", "--duration", "20s", "--store", f"postgresql://u:secret@127.0.0.1:{port}/db")
    assert done.returncode == 1 and "cannot be reached" in done.stderr, done.stderr
    assert "burn-in:" not in done.stderr and "secret" not in done.stderr and len(done.stderr.splitlines()) == 1
