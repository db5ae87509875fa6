"""A stand-in for NCCL's RAS service (the true boundary: an NCCL process of the job, listening on localhost:28028),
built from NCCL's client protocol (src/ras/client_support.cc, rasClientEventLoop) and answering with a report taken
from tests/data/ras. As strict as the real one: the first line must be CLIENT PROTOCOL, TIMEOUT takes an integer
(a fraction only from 2.31), SET FORMAT json exists from 2.28.7 (before: ERROR: Unknown command), commands are lines
ending in \\n, and the report comes in chunks that do not follow its lines, the connection closed at its end."""
from __future__ import annotations

import socket
import threading
import time


class RasStandIn:
    def __init__(self, version, text_report, json_report=None):
        self.version = tuple(int(p) for p in version.split("."))
        self.text, self.json = text_report, json_report
        self.server = socket.create_server(("127.0.0.1", 0))
        self.addr = f"127.0.0.1:{self.server.getsockname()[1]}"
        self.seen = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def close(self):
        self.server.close()

    def _serve(self):
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            with conn:
                self._session(conn.makefile("rwb"))

    def _session(self, stream):
        fmt = "text"
        first = True
        while True:
            line = stream.readline(4096)
            if not line.endswith(b"\n"):
                return
            command = line.decode().strip()
            self.seen.append(command)
            words = command.upper().split()
            if first and words[:2] != ["CLIENT", "PROTOCOL"]:
                stream.write(b"ERROR: Unknown command " + command.encode() + b"\n")
                stream.flush()
                return
            first = False
            if words[:2] == ["CLIENT", "PROTOCOL"]:
                answer = "SERVER PROTOCOL 2"
            elif words[:1] == ["TIMEOUT"]:
                ok = len(words) == 2 and (words[1].isdigit() or self.version >= (2, 31) and
                                          words[1].replace(".", "", 1).isdigit())
                answer = "OK" if ok else f"ERROR: Invalid timeout value {words[1:]}"
            elif words[:2] == ["SET", "FORMAT"] and self.version >= (2, 28, 7):
                fmt = words[2].lower() if len(words) == 3 and words[2] in ("JSON", "TEXT") else "?"
                answer = "OK" if fmt != "?" else f"ERROR: Invalid format {command}"
            elif words in (["STATUS"], ["VERBOSE", "STATUS"]):
                report = self.json if fmt == "json" else self.text
                data = report.encode()
                for at in range(0, len(data), 97):          # chunks that split lines, as the real server's do
                    stream.write(data[at:at + 97])
                    stream.flush()
                    time.sleep(0.001)
                return                                       # the end of the report is the closed connection
            else:
                answer = f"ERROR: Unknown command {command}"
            stream.write(answer.encode() + b"\n")
            stream.flush()
