"""Operations on an app as a whole, run by tools beside its workers: resetting it while none runs (reset),
sending records to its topics (send), its group's members and lag (status)."""
