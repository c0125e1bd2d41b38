// How many runs of a step kind the speculation policies do not time: with CUDA graphs a step's
// first sight runs op by op and its second is captured, both several times slower than the
// replays that follow (on the demo pair, timing them made plain steps look 2.5x dearer than
// they are, so speculation that did not pay was never turned off).
#pragma once

namespace df {

constexpr int kWarmupRuns = 2;

}  // namespace df
