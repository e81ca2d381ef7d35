"""Workers: stream stages share one consume loop; a kind is its group, message and handler."""
