"""Ship the top-level playbooks/ inside the wheel as gpuprep/share/playbooks, so an
installed gpuprep finds them next to its code (gpuprep.resources resolves both layouts).
playbooks/module_utils is a link to gpuprep/module_utils: the wheel gets a copy of its files."""
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).parent
SHARED = ("playbooks",)


class BuildWithPlaybooks(build_py):
    def run(self):
        super().run()
        for name in SHARED:
            source = HERE / name
            if source.is_dir():
                target = Path(self.build_lib) / "gpuprep" / "share" / name
                if target.exists():
                    shutil.rmtree(target)
                shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.retry"))


setup(cmdclass={"build_py": BuildWithPlaybooks})
