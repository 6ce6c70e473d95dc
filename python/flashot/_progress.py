"""A tqdm progress bar as a solve's progress callable."""


class ProgressBar:
    """``problem.solve(progress=ProgressBar())``: a tqdm bar over the solve's iteration budget, showing ε and the
    marginal error. Returns None from every call, so it never cancels; use it as a context manager (or call
    close()) to close the bar. Keyword arguments go to tqdm (e.g. ``desc="align"``, ``leave=False``).
    Needs the tqdm package (imported on first use)."""

    def __init__(self, **tqdm_kwargs):
        self._kwargs = dict(tqdm_kwargs)
        self._kwargs.setdefault("unit", "it")
        self._bar = None

    def __call__(self, progress):
        if self._bar is None:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=progress.max_iterations, **self._kwargs)
        self._bar.total = progress.max_iterations
        self._bar.n = progress.iteration
        error = progress.marginal_error
        postfix = {"stage": f"{progress.stage + 1}/{progress.stage_count}", "eps": f"{progress.epsilon:.3g}"}
        if error == error:  # not NaN: intermediate stages have no marginal error
            postfix["err"] = f"{error:.2e}"
        self._bar.set_postfix(postfix, refresh=False)
        self._bar.refresh()
        return None

    def close(self):
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
