"""The allocations, frees and markers of the predictions a test makes, recorded in order: the
predictor's capture session (fragscope.predictor.capture._Session) has its malloc, free and mark
wrapped while a `recording()` block runs."""
import contextlib


def op_and_role(phase, session, size, stream, role, ptr):
    """An allocation as ("alloc", phase, op, bytes, role, pointer): the op that made it, and the
    role it was made for (the session's current one where malloc was given none)."""
    return ("alloc", phase, session.contexts.op, size, session.role if role is None else role,
            ptr)


@contextlib.contextmanager
def recording(alloc=op_and_role):
    """Yields the list of the events in the block, in order: `alloc`(phase, session, bytes,
    stream, role, pointer) of each allocation (called once it is made) and ("free", phase,
    pointer) of each free, phase the text of the last marker ("" before the first)."""
    from fragscope.predictor import capture

    events, phase = [], ""
    malloc, free, mark = capture._Session.malloc, capture._Session.free, capture._Session.mark

    def record_malloc(session, size, stream=0, role=None):
        ptr = malloc(session, size, stream, role)
        events.append(alloc(phase, session, size, stream, role, ptr))
        return ptr

    def record_free(session, ptr):
        events.append(("free", phase, ptr))
        return free(session, ptr)

    def record_mark(session, text):
        nonlocal phase
        phase = text
        return mark(session, text)

    capture._Session.malloc, capture._Session.free = record_malloc, record_free
    capture._Session.mark = record_mark
    try:
        yield events
    finally:
        capture._Session.malloc, capture._Session.free = malloc, free
        capture._Session.mark = mark
