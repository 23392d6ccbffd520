// Line splitting for rank output (line_relay.h).
#include "launch/line_relay.h"

namespace braid::launch {

void LineRelay::feed(std::string_view bytes) {
  while (!bytes.empty()) {
    size_t newline = bytes.find('\n');
    size_t room = kMaxLine - partial_.size();
    if (newline == std::string_view::npos && bytes.size() < room) {
      partial_.append(bytes);
      return;
    }
    if (newline == std::string_view::npos || newline > room) {
      // No end of line within the limit: hand on a full piece and keep going.
      partial_.append(bytes.substr(0, room));
      bytes.remove_prefix(room);
      sink_(partial_);
      partial_.clear();
      continue;
    }
    if (partial_.empty()) {
      sink_(bytes.substr(0, newline));
    } else {
      partial_.append(bytes.substr(0, newline));
      sink_(partial_);
      partial_.clear();
    }
    bytes.remove_prefix(newline + 1);
  }
}

void LineRelay::finish() {
  if (partial_.empty()) return;
  sink_(partial_);
  partial_.clear();
}

}  // namespace braid::launch
