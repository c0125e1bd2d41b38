// Number to text the way our reference (@huggingface/jinja, i.e. JavaScript) writes numbers:
// shortest round-trip digits, exponent form below 1e-6 and from 1e21 ("1e+21", "1e-7").
#pragma once
#include <cstdint>
#include <string>

namespace df::jinja {

std::string js_number(double v);  // JavaScript's Number.prototype.toString()
// How a float prints in a template: like js_number, but whole values keep ".0" (1.0, -0.0),
// as Python and @huggingface/jinja print them.
std::string float_repr(double v);

}  // namespace df::jinja
