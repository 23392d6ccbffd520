// The questions of `braid config` (Accelerate's `accelerate config`, keeping its wording where
// the question means the same in braid): read from a stream so tests can pipe the answers.
#pragma once

#include <iosfwd>

#include "braid/accel/config.h"

namespace braid::cli {

// Asks on `out`, reads one line per answer from `in`. An empty answer (or the end of input)
// takes the default shown in brackets; a bad answer is refused with a message and asked again.
// A question without a default left unanswered at the end of input is kInvalidArgument. The
// result has passed validate_config.
accel::AcceleratorConfig ask_config_questions(std::istream& in, std::ostream& out);

}  // namespace braid::cli
