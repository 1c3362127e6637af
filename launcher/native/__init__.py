"""Python side of the native trainer: the ctypes binding of ``native/include/gantry/stage.h``."""
