"""Where rows get written: the trajectory store, its records, feedback index, SQL runner, MLflow tracking."""
