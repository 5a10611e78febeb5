"""Private meta-learning trainers (torch, the `train` extra): planned, see DESIGN.md sec. 7."""
