"""Who may use lagtrace: dashboard users and API tokens."""
