// The Catch2 main, in its own translation unit so that test files compile faster.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
