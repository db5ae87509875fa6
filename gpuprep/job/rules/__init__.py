"""The job's rules, by the source they read: profiler traces (trace.py), a running job's samples (live.py), and the
ranks against one another, across nodes (across.py). Each registers with judge.job_rule; judge.judge runs them all."""
