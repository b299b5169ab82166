"""Evaluations that read a model (and its run folder) and write tables and figures."""
