"""The words of a channel notify in the waiter's control segment: each written by one side only.

A notify is three words of the waiter's channel slot (``comm.SLOT_WORDS``), at the RECORDS word and the
offsets below from it:

* RECORDS: how many records the peer has made (the peer writes it, after VALUES);
* VALUES: the value the last record carried, a collective's signature or 1 (the peer writes it);
* CONSUMED: the record count the waiter has consumed (the waiter writes it).

The notify is set while RECORDS != CONSUMED; a wait consumes every record made so far (a notify is a flag,
so a second record before the wait is "absorbed", which the checker reports).

Why not one word the record sets and the wait clears: cffi stores an integer through a call of libc's
memcpy, and glibc's memcpy of 4 bytes stores them twice (two overlapping moves).  A wait could read and
clear the first store and the second store then bring the record back: the next wait passed without a
record (a rank out of step, reducing a peer's stale data: issue 36's 992) and the next record was
"absorbed" (CI, test_isolation_access).  The same loop in C fails with memcpy stores and never with plain
ones (300 million rounds).  With one writer per word, a store made twice writes the same value twice:
harmless.
"""
from __future__ import annotations

__all__ = ["MAX_NOTIFIES_PER_CHANNEL", "WORDS_PER_NOTIFY", "VALUES", "CONSUMED"]

MAX_NOTIFIES_PER_CHANNEL = 64
WORDS_PER_NOTIFY = 3
VALUES = MAX_NOTIFIES_PER_CHANNEL          # offset of a notify's VALUES word from its RECORDS word
CONSUMED = 2 * MAX_NOTIFIES_PER_CHANNEL    # offset of its CONSUMED word
