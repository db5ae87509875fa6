"""Standard-library code that gpuprep and the modules of its Ansible collection (gpuprep.node) both run: the NCCL
environment, the GPU table, the revert record and the container smoke test. The nvidia-smi, lspci and sshd
parsers the collection also runs live with the other parsers (gpuprep/parsers). tools/build_collection.py copies
each of these files into collection/plugins/module_utils, where the modules import it as
`ansible_collections.gpuprep.node.plugins.module_utils.gpuprep_NAME`; the copy is a build output, never edited."""
