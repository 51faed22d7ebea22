"""The seed's figures and the simulated node's calibration, read from seeds/."""
