"""The predictor's error: a prediction that could not run."""


class PredictionError(RuntimeError):
    """A prediction could not run (no torch, a library missing, the job failed on the fake
    device)."""
