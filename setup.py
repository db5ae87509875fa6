"""Ship gpuprep's Ansible collection (this repository's root is the collection gpuprep.node: galaxy.yml,
meta/, roles/, plugins/, playbooks/) inside the wheel as gpuprep/share/ansible_collections/gpuprep/node,
so an installed gpuprep runs the same files `ansible-galaxy collection build` packs. Links in the tree
(gpuprep/module_utils -> plugins/module_utils) are copied as files."""
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).parent
COLLECTION = ("galaxy.yml", "README.md", "LICENSE", "meta", "roles", "plugins", "playbooks")


class BuildWithCollection(build_py):
    def run(self):
        super().run()
        target = Path(self.build_lib) / "gpuprep" / "share" / "ansible_collections" / "gpuprep" / "node"
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        for name in COLLECTION:
            source = HERE / name
            if source.is_dir():
                shutil.copytree(source, target / name, ignore=shutil.ignore_patterns("__pycache__", "*.retry"))
            elif source.is_file():
                shutil.copy(source, target / name)


setup(cmdclass={"build_py": BuildWithCollection})
