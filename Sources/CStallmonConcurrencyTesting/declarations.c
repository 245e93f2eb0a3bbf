// The declarations only; the definitions are CStallmonConcurrency's (a C target needs one source file).
#include "CStallmonConcurrencyTesting.h"
