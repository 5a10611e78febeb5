"""Mechanisms as dominating pairs (Gaussian, Laplace, randomized response, mixtures, DP-Pix): planned, see DESIGN.md sec. 2."""
