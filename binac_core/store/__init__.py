"""Where rows get written: the trajectory store, a step's rows, feedback index, SQL runner, MLflow tracking, study archives."""
