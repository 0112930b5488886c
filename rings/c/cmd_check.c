/* cmd_check prints the command table of emunic_abi.h, one line per opcode:
 * name, opcode, family, resources and the status set, in hex. The Go test
 * TestCHeaderCommandTable compares it with rings.Commands, so a C driver
 * built on the X-macro sees the table the device executes. */
#include <stdio.h>

#include "emunic_abi.h"

#define PRINT_COMMAND(name, op, family, resources, statuses) \
	printf("%s %#x %#x %#x %#x\n", #name, (unsigned)(op), (unsigned)(family), (unsigned)(resources), \
	       (unsigned)(statuses));

int main(void) {
	EMUNIC_COMMANDS(PRINT_COMMAND)
	return 0;
}
