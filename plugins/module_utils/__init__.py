"""Code shared by the gpuprep package and the modules of the gpuprep.node collection: standard library only.

The collection's modules import these as `ansible_collections.gpuprep.node.plugins.module_utils.NAME`; the
package imports the same files as `gpuprep.module_utils.NAME` (gpuprep/module_utils links here). One copy of
each fact."""
