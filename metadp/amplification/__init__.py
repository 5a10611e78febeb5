"""Privacy amplification (privacy profiles, joint convexity, multistage episodes, groups): planned, see DESIGN.md sec. 3.5-3.9."""
