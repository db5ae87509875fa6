"""Ship gpuprep's Ansible collection (collection/: gpuprep.node) inside the wheel as
gpuprep/share/ansible_collections/gpuprep/node, so an installed gpuprep runs the same files
`ansible-galaxy collection build collection` packs; tools/build_collection.py first copies into it what it shares
with the package."""
import importlib.util
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


def _builder():
    spec = importlib.util.spec_from_file_location("build_collection", HERE / "tools" / "build_collection.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildWithCollection(build_py):
    def run(self):
        super().run()
        target = Path(self.build_lib) / "gpuprep" / "share" / "ansible_collections" / "gpuprep" / "node"
        _builder().stage(HERE, target)


setup(cmdclass={"build_py": BuildWithCollection})
