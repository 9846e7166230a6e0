"""The night: the research loop, the runs it makes, and how a loop is assembled from a program."""
