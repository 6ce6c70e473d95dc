from ._flashot import *  # noqa
