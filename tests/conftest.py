import os

from hypothesis import settings

# These machines are shared and noisy: no per-example deadline.
settings.register_profile("mccs", deadline=None, max_examples=200)
settings.load_profile("mccs")
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
