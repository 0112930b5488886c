// Package repotest holds tests of the repository itself rather than of any
// package's code: the README stays short enough to read first, nothing
// committed points outside the repository (a clone must be complete), and
// every relative link in the top-level documents and docs/ resolves to a file
// that is there.
package repotest
