// Package permissions is Guildhall's permission engine: the catalog of
// permissions, bit sets of them, and the rules of docs/design.md §5 that turn a
// user's global permissions, roles and channel overwrites into what the user
// may do. It is pure: no I/O, no state, nothing but the standard library, so
// the services call it freely and it is tested and benchmarked alone.
//
// # Sets
//
// A [Permission] is a bit index in catalog order and a [Set] is a uint64 of
// such bits. Names travel on the wire; [Parse] and [Set.Names] translate, and
// [Set.Names] always lists names in catalog order. Bits outside the catalog
// carry no meaning: [Set.Len], [Set.Names] and [Set.Permissions] ignore them,
// and [Base] and [InChannel] never return them.
//
// # Base permissions
//
// [Base] is the union of the global permissions and the permissions of each
// of the subject's roles. The owner, and anyone whose union holds
// [Administrator], has every permission ([All]).
//
// # Effective permissions in a channel
//
// [InChannel] follows docs/design.md §5 step by step:
//
//  1. Owner or [Administrator] in base: every channel-scoped permission
//     ([ChannelScoped]). Stop.
//  2. p = base, restricted to channel-scoped permissions.
//  3. The everyone overwrite: p = (p − deny) ∪ allow.
//  4. The overwrites of the subject's own roles, merged:
//     p = (p − ⋃deny) ∪ ⋃allow. An allow from one role therefore beats a
//     deny of the same permission from another role. Overwrites of roles
//     the subject does not hold are ignored.
//  5. The subject's own user overwrite: p = (p − deny) ∪ allow. It comes
//     last, so it overrides everything before it.
//  6. Without [ViewChannel] the result is empty. Without [SendMessages],
//     [AttachFiles], [EmbedLinks] and [MentionEveryone] are dropped.
//
// Overwrites can only touch channel-scoped permissions; other bits in them
// are ignored. InChannel does not allocate, also with 250 roles and 500
// overwrites: role membership is checked through a small Bloom filter kept on
// the stack, and an overwrite that cannot change the merged result of step 4
// is skipped before its role is looked up.
//
// # Explain
//
// [Explain] answers "why can't Alice see #ops?": one [Explanation] per catalog
// permission (only the channel-scoped ones in a channel), with the ordered
// [Step]s of the rules above that granted or removed it. Replaying the steps
// (allow sets, deny clears) gives [Explanation.Granted], which always equals
// what [Base] or [InChannel] decide.
package permissions
