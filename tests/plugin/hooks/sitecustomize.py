"""Test hook, put on PYTHONPATH of one submitter only: holds every Labtasker submission while the file named by
EVALWF_TEST_HOLD_SUBMIT exists (touching EVALWF_TEST_HOLD_SUBMIT + ".held" once waiting), to reproduce
deterministically a task that finishes between a submitter's DAG and its submission."""

import os
import time

_hold = os.environ.get("EVALWF_TEST_HOLD_SUBMIT")
if _hold:
    import snakemake_executor_plugin_labtasker.submission as _submission

    _original = _submission.submit_job_task

    def _held_submit(*args, **kwargs):
        if os.path.exists(_hold):
            open(_hold + ".held", "w").close()
            while os.path.exists(_hold):
                time.sleep(0.05)
        return _original(*args, **kwargs)

    _submission.submit_job_task = _held_submit
