"""op_db entries of the sample in test_executors_opinfo.py that do not match eager through the
inductor executor, each with the reason (an entry whose region inductor cannot compile is not here:
it runs on torch and passes; the log says why)."""

INDUCTOR: dict[str, str] = {}
