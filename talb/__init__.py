"""talb: the command-line front of the testbed (``talb ...``)."""
