"""Code shared by the gpuprep package and the Ansible modules of its roles: standard library only.

gpuprep imports these as `gpuprep.module_utils.NAME`; the roles' modules import the same files as
`ansible.module_utils.NAME` (playbooks/module_utils is this directory). One copy of each fact."""
