"""gpuprep apply/revert: ansible-runner wrapper (runner), pure event reducer (reducer), views (view)."""
