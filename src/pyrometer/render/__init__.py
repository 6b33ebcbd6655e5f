"""Renderers: each turns the finished profile (pyrometer.model) into one format."""
