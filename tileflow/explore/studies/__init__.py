"""`tileflow explore`: configs, studies in an Optuna storage, the session that runs them, and
what they write."""
