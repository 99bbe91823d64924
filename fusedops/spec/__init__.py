"""The op spec: ``ops.toml`` (data), the formula language (``formula``) and the generator (``generate``) that writes
every table derived from the spec: ``tables.py`` here (what the package imports at run time), the C header
``fusedops_spec.h``, the step formulas of the native kernels and ``docs/ops.md``. See the header of ``ops.toml``."""
