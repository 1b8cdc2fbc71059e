"""The wheel's packages (the rest of the build is in pyproject.toml).

Every package under binac_core, tasks and flows is discovered (a folder with an `__init__.py`), so a new subpackage
cannot be left out of a wheel; tests/integration/test_wheel.py builds one and runs `binac` from it. The repository's
top-level `sql/` (the trajectory schema and the analysis queries) ships inside the package as `binac_core/sql/`, where
`binac_core.store.storage.SQL_DIR` finds it in an installed wheel (`binac sql method_summary.sql` from any folder).
"""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["binac_core*", "tasks*", "flows*"]), "binac_core.sql"],
    package_dir={"binac_core.sql": "sql"},
)
