"""Jobs: their spec, submission, ledger, the engine, dispatch, sources, the report."""
