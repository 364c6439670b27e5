"""Distributed layer: process groups, the local launcher, the stage schedule and byte counters."""
