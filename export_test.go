package dogpile

// This file exports to package dogpile_test what its tests need of the
// package's internals; it is compiled into the test binary only.

// WithNearTest is withNear(nearTest()): the near tier's config of this
// package's tests, for those of package dogpile_test (see nearTest).
func WithNearTest() Option { return withNear(nearTest()) }
