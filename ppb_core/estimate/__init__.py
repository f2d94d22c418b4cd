"""Estimates of a run as configured, and of a plan's stages, by the memory and time models."""
