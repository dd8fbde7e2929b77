"""Fits of measured rows: α-β laws of collectives, operator models of a profiled layer,
and the accuracy of a calibration on held-out configurations."""
