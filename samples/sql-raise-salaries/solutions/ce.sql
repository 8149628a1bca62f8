-- Expected verdict: CE. Syntax error (error 1064): the SET keyword is missing.
UPDATE employees
    salary = LEAST(ROUND(salary * 1.10, 2), 9000.00)
WHERE department_id = 1
  AND hired_on < '2020-01-01'
  AND salary < 9000.00;
