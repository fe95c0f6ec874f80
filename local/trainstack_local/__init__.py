"""Offline emulation of the parts of AWS that trainstack drives (local mode). Never deployed."""
