"""The environment the tests run Open MPI's mpirun in."""
import os


def mpi_env():
    """os.environ plus what mpirun needs here: root in CI containers, shared
    memory without ptrace (CMA) in containers, more ranks than cores."""
    env = dict(os.environ)
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_btl_vader_single_copy_mechanism="none", OMPI_MCA_rmaps_base_oversubscribe="1")
    return env
