"""Offline stand-in for the pip bootstrap script ansible-test downloads from ci-files.testing.ansible.com
(unreachable from our machines): ansible-test runs it inside a fresh virtual environment with pip's install
options and packages as arguments (e.g. pip==24.2). It installs the interpreter's bundled pip (ensurepip),
then lets that pip install what was asked for from the configured index. tests/test_collection.py copies
it to ~/.ansible/test/cache/get_pip_<version>.py when no real one is cached there."""
import subprocess
import sys

subprocess.check_call([sys.executable, "-m", "ensurepip", "--default-pip"], stdout=subprocess.DEVNULL)
wanted = [arg for arg in sys.argv[1:] if arg not in ("--no-setuptools", "--no-wheel")]
subprocess.check_call([sys.executable, "-m", "pip", "install", "--disable-pip-version-check", *wanted])
