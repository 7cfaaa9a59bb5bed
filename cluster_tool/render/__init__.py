"""Rendering a cluster spec into an inventory folder (layout documented in render())."""
