// Internal to the events log's two files (events.cpp, events_log.cpp): what one needs of the
// other. Not installed, not part of the log's interface (events.hpp).
#pragma once

namespace stroboscope {

// Forgets the calling thread's cached OS thread id (events.cpp: a forked child's only thread
// has the id of the parent thread that forked until then). Called by the fork handler.
void forget_event_thread_id() noexcept;

}  // namespace stroboscope
