"""Nsight Systems: finding nsys, reading its exports, adapting them to the run store schema."""
