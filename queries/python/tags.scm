; Python extraction query, in the tree-sitter tags conventions.
;
; Captures read by src/extract:
;   @definition.<kind>  the node of an entity (class, function, field); `function`
;                       becomes `method` when its parent entity is a class
;   @name               the entity's or the call's name
;   @reference.call     a call; with @name, optional @receiver (the object before the
;                       dot, as written) and @arguments (its argument list)
;   @import             a whole import statement (src/extract/python.rs reads it)
;   @base.owner / @base a class and one of its bases as written
;
; Docstrings, import statements and parameters are read from the captured nodes by
; src/extract/python.rs.
;
; For Python this query is the specification: an index finds the same matches in the one
; walk that also finds the bindings (`python::bindings` filling `extract::Tags`), and the test
; `walk_finds_what_the_query_finds` holds the walk to this query (a change here needs
; the same change there).

(class_definition name: (identifier) @name) @definition.class
(function_definition name: (identifier) @name) @definition.function

; Class-body assignments are fields.
(class_definition
  body: (block
    (expression_statement
      (assignment left: (identifier) @name) @definition.field)))

(call
  function: (identifier) @name
  arguments: (_) @arguments) @reference.call

(call
  function: (attribute
    object: (_) @receiver
    attribute: (identifier) @name)
  arguments: (_) @arguments) @reference.call

(import_statement) @import
(import_from_statement) @import

; A base written as a call (`BaseManager.from_queryset(QuerySet)`) is kept as written too:
; the resolver reads a class factory called on a class as a subclass of that class.
(class_definition
  superclasses: (argument_list [(identifier) (attribute) (call)] @base)) @base.owner
