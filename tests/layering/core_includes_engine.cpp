// Compiled with treespec_core's include path only (tests/CMakeLists.txt, "Layering"):
// core depends on no other module, so this include must not resolve.
#include "engine/engine.h"
