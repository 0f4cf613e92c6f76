"""Operations on an app as a whole, run by tools while no worker runs it (reset)."""
