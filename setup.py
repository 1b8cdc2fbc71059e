"""The wheel's packages (the rest of the build is in pyproject.toml).

Every package under binac_core, tasks and flows is discovered (a folder with an `__init__.py`), so a new subpackage
cannot be left out of a wheel; tests/integration/test_wheel.py builds one and runs `binac` from it. The repository's
top-level `sql/` (the trajectory schema and the analysis queries) ships inside the package as `binac_core/sql/`, where
`binac_core.store.storage.SQL_DIR` finds it in an installed wheel (`binac sql method_summary.sql` from any folder).
The bases shipped in the package (`binac_core/presets/bases/`, a data folder without an `__init__.py`) are listed
as a package of their own, so that setuptools ships their files (pyproject.toml's package data) without warning.
"""

from setuptools import find_packages, setup

setup(
    packages=[
        *find_packages(include=["binac_core*", "tasks*", "flows*"]),
        "binac_core.sql",
        "binac_core.presets.bases",
    ],
    package_dir={"binac_core.sql": "sql"},
)
