"""The panels of `llmd top`, one per screen region; each draws itself from a TopView."""
